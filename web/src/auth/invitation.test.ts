import { describe, expect, it } from "vitest";
import { acceptInvitation, checkInvitation, invitationFromHash } from "./invitation";

const answer = (status: number, body: unknown) =>
  (async () => new Response(JSON.stringify(body), { status })) as unknown as typeof fetch;

describe("an invitation link", () => {
  it("carries the code, the tenant and the address", () => {
    expect(invitationFromHash("#invitation=abc_-1&tenant=Acme%20Inc&email=ada%40example.com")).toEqual({
      code: "abc_-1",
      tenant: "Acme Inc",
      email: "ada@example.com",
    });
    expect(invitationFromHash("#invitation=abc")).toEqual({ code: "abc", tenant: null, email: null });
    expect(invitationFromHash("#token=abc")).toBeNull();
  });

  it("is accepted with a plain POST, or refused with the API's reason", async () => {
    const ok = await acceptInvitation(
      "c",
      answer(200, {
        data: {
          acceptInvitation: { token: "olv_x", viewer: { user: { email: "a@b.c" }, tenant: { slug: "acme", name: "Acme" } } },
        },
      }),
    );
    expect(ok).toEqual({ ok: true, token: "olv_x", tenant: { slug: "acme", name: "Acme" }, email: "a@b.c" });
    const refused = await acceptInvitation(
      "c",
      answer(200, { data: null, errors: [{ message: "expired", extensions: { code: "BAD_USER_INPUT", reason: "expired" } }] }),
    );
    expect(refused).toEqual({ ok: false, reason: "expired", message: "expired" });
    const down = await acceptInvitation("c", (async () => {
      throw new TypeError("failed");
    }) as unknown as typeof fetch);
    expect(down.ok).toBe(false);
  });
});

describe("an invitation code checked when the page opens", () => {
  it("says what accepting would do, or why it would be refused, and reads a failure as unknown", async () => {
    const valid = await checkInvitation(
      "c",
      answer(200, { data: { invitationCode: { valid: true, reason: null, message: null, tenantName: "Acme", email: "a@b.c", role: "VIEWER" } } }),
    );
    expect(valid).toEqual({ valid: true, tenantName: "Acme", email: "a@b.c", role: "VIEWER" });
    const revoked = await checkInvitation(
      "c",
      answer(200, { data: { invitationCode: { valid: false, reason: "revoked", message: "revoked", tenantName: null, email: null, role: null } } }),
    );
    expect(revoked).toEqual({ valid: false, reason: "revoked", message: "revoked" });
    const down = await checkInvitation("c", (async () => {
      throw new TypeError("failed");
    }) as unknown as typeof fetch);
    expect(down).toBeNull();
  });
});
