import { describe, expect, it } from "vitest";
import { decideLink, tokenFromHash } from "./token";

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

describe("decideLink", () => {
  it("signs in when nobody is signed in", () => {
    expect(decideLink("#token=olv_new", null)).toEqual({ action: "adopt", token: "olv_new" });
  });

  it("asks before replacing the token of someone signed in", () => {
    expect(decideLink("#token=olv_other", "olv_mine")).toEqual({ action: "ask", token: "olv_other" });
  });

  it("does nothing for the same token or no token", () => {
    expect(decideLink("#token=olv_mine", "olv_mine")).toEqual({ action: "none" });
    expect(decideLink("#runs", "olv_mine")).toEqual({ action: "none" });
    expect(decideLink("", null)).toEqual({ action: "none" });
  });
});

describe("refusalMessage", () => {
  it("a token never accepted is not told it is no longer accepted", async () => {
    const { markTokenAccepted, refusalMessage, setToken } = await import("./token");
    setToken("olv_never");
    expect(refusalMessage()).toMatch(/did not accept/);
    markTokenAccepted();
    expect(refusalMessage()).toMatch(/no longer accepts/);
    setToken("olv_other"); // a new token starts over
    expect(refusalMessage()).toMatch(/did not accept/);
    setToken(null);
  });
});
