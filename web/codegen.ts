// GraphQL types and typed documents for the app, generated from the schema the server serves.
//   npm run schema    writes schema.graphql from `uv run outlive schema` (run from the repo root)
//   npm run codegen   writes src/api/generated.ts from schema.graphql and src/api/documents/*.graphql
// Both outputs are checked in; CI (.ci/run) regenerates them and fails when they differ.
import type { CodegenConfig } from "@graphql-codegen/cli";

const config: CodegenConfig = {
  schema: "schema.graphql",
  documents: ["src/api/documents/*.graphql"],
  generates: {
    "src/api/generated.ts": {
      plugins: ["typescript-operations", "typed-document-node"],
      config: {
        enumsAsTypes: true,
        avoidOptionals: { field: true, inputValue: false, object: true, defaultValue: true },
        maybeValue: "T | null",
        useTypeImports: true,
        strictScalars: true,
        scalars: {
          DateTime: "string",
          JSON: { input: "unknown", output: "import('./json').Json" },
        },
      },
    },
  },
  hooks: {},
};

export default config;
