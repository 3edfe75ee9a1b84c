/** Who a token signs in as, asked of the API without keeping the token. */

export type Who = { tenant: string; email: string } | { error: string };

export async function whoIs(token: string): Promise<Who> {
  try {
    const response = await fetch("/graphql", {
      method: "POST",
      headers: { "content-type": "application/json", authorization: `Bearer ${token}` },
      body: JSON.stringify({ query: "query WhoAmI { viewer { tenant { slug } user { email } } }" }),
    });
    if (response.status === 401) return { error: "The API did not accept that token." };
    if (!response.ok) return { error: `The API answered HTTP ${response.status}.` };
    const body = (await response.json()) as {
      data?: { viewer: { tenant: { slug: string }; user: { email: string } } } | null;
      errors?: { message: string }[];
    };
    if (body.errors?.length || !body.data) {
      return { error: body.errors?.map((e) => e.message).join("; ") ?? "No answer." };
    }
    return { tenant: body.data.viewer.tenant.slug, email: body.data.viewer.user.email };
  } catch {
    return { error: "Cannot reach the API (is it running?)." };
  }
}
