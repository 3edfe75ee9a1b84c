import { Link } from "../../app/router";
import { shortId } from "../../ui/format";

/** The runs that retried this one (newest first): the other way along "Open the run it retries". */
export function RetriedAs({ ids }: { ids: readonly string[] }) {
  if (ids.length === 0) return null;
  return (
    <p className="small" data-testid="retried-as">
      Retried as{" "}
      {ids.map((id, i) => (
        <span key={id}>
          {i > 0 && ", "}
          <Link to={`/runs/${id}`} className="mono" aria-label={`Retried as run ${id}`}>
            {shortId(id)}
          </Link>
        </span>
      ))}
      {ids.length >= 10 && " (the newest 10)"}
    </p>
  );
}
