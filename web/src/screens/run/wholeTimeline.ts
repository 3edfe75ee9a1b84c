import { useApolloClient, useQuery } from "@apollo/client/react";
import { useEffect, useRef, useState } from "react";
import { EVENTS_PAGE, RUN_TIMELINE } from "../../api/documents/runs";
import { lastSeq } from "../../realtime/timeline";

/**
 * A run's whole timeline, read a page (EVENTS_PAGE) at a time until a page comes back short, and
 * whether it is all in (`complete`). Everything the run page draws from the timeline (the
 * waterfall, the attempt count, why it is here, the Events tab's count) waits for `complete`:
 * a 2,000-event run never shows the picture its first 500 events paint. Mounted once, by the
 * run page; later events come with run.event nudges (realtime/timeline.ts pages them the same way).
 */
export function useWholeTimeline(id: string) {
  const client = useApolloClient();
  const { data, error, loading } = useQuery(RUN_TIMELINE, { variables: { id, after: 0 } });
  const events = data?.run?.events ?? [];
  const last = lastSeq(data);
  const asked = useRef(-1);
  const [shortAfter, setShortAfter] = useState<number | null>(null); // a page after this seq was short
  const full = events.length > 0 && events.length % EVENTS_PAGE === 0;
  useEffect(() => {
    if (loading || !data || !full || asked.current === last) return;
    asked.current = last;
    const before = events.length; // the answer is read back merged (the `events` type policy)
    void client
      .query({ query: RUN_TIMELINE, variables: { id, after: last }, fetchPolicy: "network-only" })
      .then((result) => {
        if ((result.data?.run?.events.length ?? 0) - before < EVENTS_PAGE) setShortAfter(last);
      })
      .catch(() => {
        asked.current = -1; // asked again on the next render that has data
      });
  }, [client, id, data, full, last, loading, events.length]);
  const complete = !!data && (!full || shortAfter === last);
  return { events, complete, error, loading, data };
}
