/** A tsc project of the test build: its config, output folder and one output whose presence means built. */
export interface BuildProject {
  config: string;
  out: string;
  entry: string;
}
export const PROJECTS: BuildProject[];
export function buildInfo(p: BuildProject): string;
export function buildInputs(root: string): string;
export function isBuilt(root: string, inputs?: string): boolean;
export function recordBuilt(root: string, inputs: string): void;
export function isCold(root: string): boolean;
export function tscBuild(root: string, p: BuildProject): void;
