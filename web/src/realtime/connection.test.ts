import { describe, expect, it } from "vitest";
import { type ConnectionEvent, type ConnectionState, closeCode, isReconnectable, nextState } from "./connection";

const run = (events: ConnectionEvent[], from: ConnectionState = "connecting") =>
  events.reduce(nextState, from);

describe("nextState", () => {
  it("goes connecting → live on the first acknowledgement", () => {
    expect(run([{ type: "connecting" }, { type: "connected" }])).toBe("live");
  });

  it("shows a restart as reconnecting, then live again", () => {
    const states: ConnectionState[] = [];
    let s: ConnectionState = "live";
    for (const e of [
      { type: "closed", code: 1012 },
      { type: "connecting" },
      { type: "closed", code: 1006 },
      { type: "connecting" },
      { type: "connected" },
    ] as ConnectionEvent[]) {
      s = nextState(s, e);
      states.push(s);
    }
    expect(states).toEqual(["reconnecting", "reconnecting", "reconnecting", "reconnecting", "live"]);
  });

  it("is offline while the browser is, and reconnecting once it is back", () => {
    expect(run([{ type: "connected" }, { type: "browser-offline" }])).toBe("offline");
    expect(run([{ type: "browser-offline" }, { type: "closed", code: 1006 }], "live")).toBe("offline");
    expect(run([{ type: "browser-offline" }, { type: "connecting" }], "live")).toBe("offline");
    expect(run([{ type: "browser-offline" }, { type: "browser-online" }], "live")).toBe(
      "reconnecting",
    );
    expect(run([{ type: "browser-online" }], "live")).toBe("live");
  });

  it("stops at a refused token", () => {
    expect(run([{ type: "closed", code: 4403 }, { type: "connected" }], "live")).toBe("unauthorized");
  });

  it("is offline when the client gave up", () => {
    expect(run([{ type: "gave-up" }], "reconnecting")).toBe("offline");
  });
});

describe("isReconnectable", () => {
  it("reconnects after a redeploy-shaped close", () => {
    expect(isReconnectable({ code: 1012, reason: "Service Restart" })).toBe(true);
    expect(isReconnectable({ code: 1001, reason: "Going Away" })).toBe(true);
  });

  it("backs off and retries a server that is full (1013, try again later)", () => {
    // The server's socket cap, the tenant's, or a socket that fell behind: the close comes before
    // connection_ack, so graphql-ws never resets its retry count and each wait grows (backoff.ts).
    expect(isReconnectable({ code: 1013, reason: "too many sockets in this process: retry later" })).toBe(
      true,
    );
    expect(closeCode({ code: 1013, reason: "" })).toBe(1013);
  });

  it("reconnects after a dropped network, a silent socket or a bare error", () => {
    expect(isReconnectable({ code: 1006, reason: "" })).toBe(true);
    expect(isReconnectable({ code: 4499, reason: "Terminated" })).toBe(true);
    expect(isReconnectable(new Event("error"))).toBe(true);
    expect(isReconnectable(new Error("boom"))).toBe(true);
  });

  it("does not hammer the server with a refused token", () => {
    expect(isReconnectable({ code: 4403, reason: "Forbidden" })).toBe(false);
  });
});
