import { type ReactNode, useState } from "react";

/**
 * A dangerous action that asks first: its button (`ask`), then, in a group named by `question`,
 * what the answer costs (`warning`), `yes` (focused: Enter confirms) and `no` (asks nothing
 * more). Used for Cancel, Remove and Delete; Pause asks nothing, since Resume undoes it.
 */
export function Confirmed({
  ask,
  askLabel,
  question,
  warning,
  yes,
  no = "Keep it",
  busy,
  onYes,
}: {
  ask: string;
  askLabel?: string;
  question: string;
  warning?: ReactNode;
  yes: string;
  no?: string;
  busy?: boolean;
  onYes: () => void;
}) {
  const [asking, setAsking] = useState(false);
  if (!asking) {
    return (
      <button type="button" className="danger" aria-label={askLabel} onClick={() => setAsking(true)}>
        {ask}
      </button>
    );
  }
  return (
    <span role="group" aria-label={question} className="confirm">
      {warning && <span className="small">{warning}</span>}
      <button type="button" className="danger" autoFocus aria-disabled={busy ? true : undefined} onClick={onYes}>
        {yes}
      </button>
      <button type="button" className="quiet" onClick={() => setAsking(false)}>
        {no}
      </button>
    </span>
  );
}
