/** The inputs of a step: folders walked (their files filtered by `keep`), single files, and other text. */
export interface StampInputs {
  dirs?: string[];
  files?: string[];
  keep?: (relativePath: string) => boolean;
  extra?: string[];
}
export function inputStamp(root: string, inputs: StampInputs): string;
export function passedWith(root: string, name: string, stamp: string): boolean;
export function recordPass(root: string, name: string, stamp: string): void;
export function forget(root: string, name: string): void;
