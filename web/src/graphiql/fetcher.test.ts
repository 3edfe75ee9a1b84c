import { describe, expect, it } from "vitest";
import { authorization } from "./fetcher";

describe("authorization", () => {
  it("prefers the headers editor, in any case", () => {
    expect(authorization({ authorization: "Bearer edited" }, "stored")).toBe("Bearer edited");
    expect(authorization({ AUTHORIZATION: "Bearer edited" }, "stored")).toBe("Bearer edited");
  });

  it("falls back to the app's token", () => {
    expect(authorization({}, "stored")).toBe("Bearer stored");
    expect(authorization({ Authorization: "  " }, "stored")).toBe("Bearer stored");
    expect(authorization(undefined, null)).toBeNull();
  });
});
