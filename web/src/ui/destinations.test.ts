import { describe, expect, it } from "vitest";
import { isLoopbackRefusal } from "./destinations";

describe("isLoopbackRefusal", () => {
  it("hints at OUTLIVE_WEBHOOK_ALLOW_PRIVATE for this machine and private networks", () => {
    for (const url of ["http://127.0.0.1:9000/hook", "http://localhost/x", "http://[::1]/x", "http://10.1.2.3/", "http://192.168.0.9/", "http://172.20.0.1/"]) {
      expect(isLoopbackRefusal(url, "destination not allowed")).toBe(true);
    }
  });

  it("stays quiet for public hosts and other errors", () => {
    expect(isLoopbackRefusal("https://example.com/hook", "destination not allowed")).toBe(false);
    expect(isLoopbackRefusal("http://172.32.0.1/", "destination not allowed")).toBe(false);
    expect(isLoopbackRefusal("http://127.0.0.1/", "url must be http or https")).toBe(false);
    expect(isLoopbackRefusal("not a url", "destination not allowed")).toBe(false);
  });
});
