import { describe, expect, it } from "vitest";
import { tokenFromHash } from "./token";

describe("tokenFromHash", () => {
  it("reads the token of the link outlive dev prints", () => {
    expect(tokenFromHash("#token=olv_abc.def")).toBe("olv_abc.def");
    expect(tokenFromHash("token=xyz")).toBe("xyz");
  });

  it("ignores other fragments", () => {
    expect(tokenFromHash("")).toBeNull();
    expect(tokenFromHash("#runs")).toBeNull();
    expect(tokenFromHash("#token=")).toBeNull();
  });
});
