import { useQuery } from "@apollo/client/react";
import { useState } from "react";
import { RUN_TIMELINE } from "../../api/documents/runs";
import { ErrorNote, Loading } from "../../ui/common";
import { compactJson, formatTime } from "../../ui/format";
import { EVENTS_WINDOW, eventTypes, windowEvents } from "./events";

/**
 * The run's timeline, oldest first, filterable by type; it draws EVENTS_WINDOW rows and "Show
 * more" draws the next ones, so a run of thousands of events does not draw them all at once.
 */
export function Timeline({ id, complete }: { id: string; complete: boolean }) {
  // The pages after the first are asked for by the run page (useWholeTimeline), whatever the tab.
  const { data, error, loading } = useQuery(RUN_TIMELINE, { variables: { id, after: 0 } });
  const events = data?.run?.events ?? [];
  const [type, setType] = useState("");
  const [text, setText] = useState("");
  const [shown, setShown] = useState(EVENTS_WINDOW);

  const types = eventTypes(events);
  const { matching, rows } = windowEvents(events, type, shown, text);
  const filtered = type !== "" || text.trim() !== "";
  return (
    <section aria-labelledby="timeline-heading">
      <div className="section-head">
        <h2 id="timeline-heading">
          Events{" "}
          <span className="muted small">
            ({filtered ? `${matching} of ${events.length}` : events.length}
            {complete ? "" : ", reading the rest…"})
          </span>
        </h2>
        <div className="field inline">
          <label htmlFor="event-search">Search</label>
          <input
            id="event-search"
            type="search"
            placeholder="a name, an email, an error…"
            value={text}
            onChange={(e) => {
              setText(e.target.value);
              setShown(EVENTS_WINDOW);
            }}
          />
        </div>
        {types.length > 1 && (
          <div className="field inline">
            <label htmlFor="event-type">Type</label>
            <select
              id="event-type"
              value={type}
              onChange={(e) => {
                setType(e.target.value);
                setShown(EVENTS_WINDOW);
              }}
            >
              <option value="">All types</option>
              {types.map((t) => (
                <option key={t.type} value={t.type}>
                  {t.type} ({t.count})
                </option>
              ))}
            </select>
          </div>
        )}
      </div>
      {error && <ErrorNote error={error} />}
      {!data && loading && <Loading />}
      {data && events.length === 0 && <p className="muted">Nothing yet.</p>}
      {rows.length > 0 && (
        <ol className="timeline" aria-label="Timeline">
          {rows.map((e) => (
            <li key={e.seq} data-seq={e.seq} className={`event event-${e.type}`}>
              <span className="event-seq mono">#{e.seq}</span>
              <span className="event-type">{e.type}</span>
              <span className="event-data mono">{compactJson(e.data)}</span>
              <time className="event-at muted" dateTime={e.at} title={e.at}>
                {formatTime(e.at)}
              </time>
            </li>
          ))}
        </ol>
      )}
      {matching > rows.length && (
        <p className="actions">
          <span className="muted small">
            Showing {rows.length} of {matching}.
          </span>{" "}
          <button type="button" onClick={() => setShown((n) => n + EVENTS_WINDOW)}>
            Show {Math.min(EVENTS_WINDOW, matching - rows.length)} more
          </button>
        </p>
      )}
    </section>
  );
}
