/** The hint for a webhook URL the API refused because it names this machine or a private network. */

/** A refused URL that names this machine or a private network: the hint about development. */
export function isLoopbackRefusal(url: string, message: string): boolean {
  if (!/not allowed/i.test(message)) return false;
  let host = "";
  try {
    host = new URL(url.trim()).hostname.replace(/^\[|\]$/g, "");
  } catch {
    return false;
  }
  return (
    host === "localhost" ||
    host.endsWith(".localhost") ||
    host === "::1" ||
    /^127\./.test(host) ||
    /^10\./.test(host) ||
    /^192\.168\./.test(host) ||
    /^172\.(1[6-9]|2\d|3[01])\./.test(host) ||
    host === "0.0.0.0"
  );
}
