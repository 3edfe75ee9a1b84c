import { describe, expect, it } from "vitest";
import { latestPerAddress } from "./Invitations";

const row = (id: string, email: string) =>
  ({ id, email, status: "SENT", createdAt: "", sentAt: null, expiresAt: "", acceptedAt: null, lastError: null }) as const;

describe("the Invitations screen", () => {
  it("shows one row per address: its newest invitation, with how many came before", () => {
    const rows = latestPerAddress([row("3", "a@x"), row("2", "b@x"), row("1", "a@x")]);
    expect(rows.map((r) => [r.invitation.id, r.earlier])).toEqual([
      ["3", 1],
      ["2", 0],
    ]);
  });
});
