// Not a style linter (prettier formats, tsc types): ESLint runs only the
// type-aware promise rules, so that an unawaited promise, whose rejection
// would be lost, is a lint error. A promise left unawaited on purpose is
// marked `void` and has its rejection handled (a .catch, or NB: why not).
import { defineConfig } from "eslint/config";
import tseslint from "typescript-eslint";

export default defineConfig(
  { ignores: ["dist/", "kernel-ext/dist/", "native/", "notebooks/", "docs/"] },
  {
    files: ["**/*.ts"],
    languageOptions: {
      parser: tseslint.parser,
      // tsconfig.check.json is the one that covers test/ as well as sdk/,
      // kernel-ext/ and scripts/.
      parserOptions: { project: "./tsconfig.check.json", tsconfigRootDir: import.meta.dirname },
    },
    plugins: { "@typescript-eslint": tseslint.plugin },
    linterOptions: { reportUnusedDisableDirectives: "error" },
    rules: {
      "@typescript-eslint/no-floating-promises": "error",
      "@typescript-eslint/no-misused-promises": "error",
    },
  },
);
