import { useMutation, useQuery } from "@apollo/client/react";
import { useState } from "react";
import { CANCEL_RUN, KEY_HOLDER } from "../../api/documents/runs";
import { describeError } from "../../api/errors";
import type { RunConflict } from "../../api/generated";
import { ACTIVE_STATUSES } from "../../api/types";
import { Link } from "../../app/router";
import { StatusBadge } from "../../ui/common";
import { shortId } from "../../ui/format";
import { Words } from "../../ui/Words";
import { holderOf, whatStartDoes } from "./startOptions";

/**
 * Which run holds the key typed in the Start form: the active run of agent + key (the head of
 * its line), its state, how many runs wait behind it, what Start run will do about it, and
 * "Open it" / "Cancel it". Live: the KeyHolder query is refreshed by the run nudges.
 */
export function KeyHolder({ agent, runKey, strategy }: { agent: string; runKey: string; strategy: RunConflict }) {
  const { data, error } = useQuery(KEY_HOLDER, {
    variables: { agent, key: runKey, status: [...ACTIVE_STATUSES] },
  });
  if (error) {
    return (
      <p className="note note-error" role="alert">
        Cannot tell which run holds this key: {describeError(error)}
      </p>
    );
  }
  if (!data) return null;
  const { holder, behind } = holderOf(data.runs.edges.map((e) => e.node));
  return (
    <section className="panel key-holder" aria-label="Run holding this key">
      {holder ? (
        <>
          <p role="status" data-testid="key-holder">
            Run <span className="mono">{shortId(holder.id)}</span> holds this key:{" "}
            <StatusBadge status={holder.status} />
            {holder.cancelRequestedAt && <span className="muted small"> cancel requested</span>}
            {behind > 0 && <span> ({behind} more queued behind it)</span>}.
          </p>
          <p className="hint">
            <Words text={whatStartDoes(strategy, behind)} />
          </p>
          <HolderActions id={holder.id} cancelling={holder.cancelRequestedAt !== null} />
        </>
      ) : (
        <p role="status" data-testid="key-holder">
          No run holds this key: Start run starts one at once.
        </p>
      )}
    </section>
  );
}

function HolderActions({ id, cancelling }: { id: string; cancelling: boolean }) {
  const [cancelRun, cancel] = useMutation(CANCEL_RUN, { refetchQueries: ["KeyHolder"] });
  const [confirming, setConfirming] = useState(false);
  const yes = () => {
    if (cancel.loading) return;
    void cancelRun({ variables: { id } })
      .then(() => setConfirming(false))
      .catch(() => undefined);
  };
  return (
    <div className="actions">
      <Link to={`/runs/${id}`} className="button">
        Open it
      </Link>
      {confirming ? (
        <span role="group" aria-label="Cancel the run holding this key?" className="confirm">
          <button type="button" className="danger" autoFocus onClick={yes}>
            Yes, cancel it
          </button>
          <button type="button" className="quiet" onClick={() => setConfirming(false)}>
            Keep it
          </button>
        </span>
      ) : (
        <button type="button" className="danger" disabled={cancelling} onClick={() => setConfirming(true)}>
          Cancel it
        </button>
      )}
      {cancel.error && (
        <p className="note note-error" role="alert">
          {describeError(cancel.error)}
        </p>
      )}
    </div>
  );
}
