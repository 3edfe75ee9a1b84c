/// <reference types="vitest/config" />
import { resolve } from "node:path";
import { defineConfig } from "vite";

// Two pages: the app (index.html) and GraphiQL (graphiql.html), both built into the Python package
// so that `outlive api` and `outlive dev` serve them from the package's own files.
const outDir = resolve(__dirname, "../src/outlive/web/dist");
const api = process.env.OUTLIVE_API ?? "http://127.0.0.1:8000";

export default defineConfig({
  base: "/",
  build: {
    outDir,
    emptyOutDir: true,
    assetsDir: "assets",
    sourcemap: false,
    chunkSizeWarningLimit: 6000, // GraphiQL's editor (Monaco) is big; the app's own chunk is small
    rollupOptions: {
      input: {
        index: resolve(__dirname, "index.html"),
        graphiql: resolve(__dirname, "graphiql.html"),
      },
      // GraphiQL's dependencies carry "use client" directives, meaningless in a plain SPA
      onwarn(warning, warn) {
        if (warning.code === "MODULE_LEVEL_DIRECTIVE") return;
        warn(warning);
      },
    },
  },
  worker: { format: "es" },
  server: {
    // `npm run dev` against a running `outlive dev` (or OUTLIVE_API=http://host:port).
    proxy: { "/graphql": { target: api, ws: true, changeOrigin: true } },
  },
  test: {
    include: ["src/**/*.test.ts"],
    environment: "node",
  },
});
