import { useEffect, useState } from "react";
import { useRealtime } from "../../app/realtime";
import { applyChunk, type LiveOutput, liveTexts, NO_OUTPUT } from "../../realtime/output";
import { LiveTexts } from "./StepOutput";

/**
 * What the run is writing now (`runOutput`), at the top of Overview while it is live: display
 * only, never state. Each stream's text as it comes; a stream that ended says so until the next
 * begins. The Steps tab has what each step recorded.
 */
export function LiveOutputPanel({ id }: { id: string }) {
  const { socket } = useRealtime();
  const [output, setOutput] = useState<LiveOutput>(NO_OUTPUT);
  useEffect(() => {
    let state = NO_OUTPUT;
    setOutput(NO_OUTPUT);
    return socket.followOutput(id, {
      next: (chunk) => {
        state = applyChunk(state, chunk);
        setOutput(state);
      },
      complete: () => undefined, // the run settled: the panel goes with it
      error: () => undefined, // nothing to show: the timeline and the steps are the truth
    });
  }, [id, socket]);
  const texts = liveTexts(output);
  if (texts.length === 0) return null;
  return (
    <section className="panel" aria-labelledby="live-output-heading" data-testid="overview-live">
      <h2 id="live-output-heading">
        Live output <span className="muted small">(as it is written; the Steps tab has what each step recorded)</span>
      </h2>
      <LiveTexts texts={texts} label="Live output" testId="overview-live-text" />
    </section>
  );
}
