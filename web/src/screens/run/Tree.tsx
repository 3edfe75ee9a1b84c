import { useQuery } from "@apollo/client/react";
import { CHILDREN_PAGE, RUN_TREE, type RunTreeData } from "../../api/documents/tree";
import { Link, useLocation } from "../../app/router";
import { ErrorNote, Loading, StatusBadge, When } from "../../ui/common";
import { shortId } from "../../ui/format";
import { childLabel, childrenAfter, childrenFrom, childrenHref, childTotal, isPathCut, orderedCounts, treeHref } from "./tree";

export type RunTree = NonNullable<RunTreeData["run"]>;

/**
 * The run's tree as the page asks for it: its path from the root, its children's counts and the
 * page of children the address names. Asked once per page (the tab list uses it to know whether
 * to offer the tab), and again on the run's nudges and its shown children's (see
 * realtime/invalidation.ts).
 */
export function useRunTree(id: string) {
  const { params } = useLocation();
  const { data, previousData, error, loading } = useQuery(RUN_TREE, {
    variables: { id, first: CHILDREN_PAGE, after: childrenAfter(params) },
  });
  // While the next page of children loads, the page shown stays (not while another run's loads).
  const shown = data ?? (previousData?.run?.id === id ? previousData : undefined);
  return { tree: shown?.run ?? null, error, loading };
}

/** The Tree tab: the path from the root, the parent, and the children with their counts. */
export function TreePanel({
  run,
  tree,
  error,
  loading,
}: {
  run: { id: string; agent: string; status: string };
  tree: RunTree | null;
  error: unknown;
  loading: boolean;
}) {
  return (
    <section className="panel" aria-labelledby="tree-heading">
      <h2 id="tree-heading">Tree</h2>
      {error ? <ErrorNote error={error} what="child runs" /> : null}
      {!tree && loading && <Loading />}
      {tree && (
        <>
          <TreePath run={run} tree={tree} />
          <Parent tree={tree} />
          <Children tree={tree} />
        </>
      )}
    </section>
  );
}

/** A run of the tree: its short id the link (named with its full id), then its agent. */
function RunLink({ id, agent, label }: { id: string; agent: string; label: string }) {
  return (
    <>
      <Link to={treeHref(id)} className="mono" aria-label={`${label} ${id}`}>
        {shortId(id)}
      </Link>{" "}
      <span className="muted">· {agent}</span>
    </>
  );
}

/** Root → … → this run, each a link but the last. */
function TreePath({ run, tree }: { run: { id: string; agent: string; status: string }; tree: RunTree }) {
  return (
    <nav aria-label="Path from the root" className="tree-path">
      <ol>
        {isPathCut(tree) && (
          <li className="muted" title="runs above this one were deleted (retention)">
            …
          </li>
        )}
        {tree.ancestors.map((a) => (
          <li key={a.id}>
            <RunLink id={a.id} agent={a.agent} label="Run" /> <StatusBadge status={a.status} />
          </li>
        ))}
        <li aria-current="page">
          <span className="mono">{shortId(run.id)}</span> <span className="muted">· {run.agent} (this run)</span>
        </li>
      </ol>
    </nav>
  );
}

function Parent({ tree }: { tree: RunTree }) {
  const parent = tree.ancestors.find((a) => a.id === tree.parentId);
  if (tree.parentId === null) {
    return <p className="muted">A top-level run: no run started it.</p>;
  }
  return (
    <p>
      Started by{" "}
      <RunLink id={tree.parentId} agent={parent?.agent ?? "?"} label="Parent run" />
      {parent && (
        <>
          {" "}
          <StatusBadge status={parent.status} />
        </>
      )}
    </p>
  );
}

/** The children's counts, then a page of them, oldest first. */
function Children({ tree }: { tree: RunTree }) {
  const { path, params } = useLocation();
  const total = childTotal(tree.childCounts);
  const edges = tree.children.edges;
  const after = childrenAfter(params);
  const from = after ? childrenFrom(params) : 0;
  const next = tree.children.pageInfo;
  return (
    <>
      <h3 id="children-heading" className="small-heading">
        Children <span className="muted small">({total})</span>
      </h3>
      {total === 0 && <p className="muted">It started no child runs.</p>}
      {total > 0 && (
        <ul className="status-counts" aria-label="Children by status">
          {orderedCounts(tree.childCounts).map((c) => (
            <li key={c.status} data-testid={`children-${c.status.toLowerCase()}`}>
              <StatusBadge status={c.status} /> <span className="count">{c.count}</span>
            </li>
          ))}
        </ul>
      )}
      {edges.length > 0 && (
        <div className="table-wrap">
          <table className="table cards-narrow" aria-labelledby="children-heading">
            <thead>
              <tr>
                <th scope="col">Run</th>
                <th scope="col">Agent</th>
                <th scope="col">Status</th>
                <th scope="col">Created</th>
              </tr>
            </thead>
            <tbody>
              {edges.map(({ node }, i) => (
                <tr key={node.id} data-run-id={node.id}>
                  <td data-label="Run">
                    <Link to={treeHref(node.id)} className="mono" aria-label={`Child run ${node.id}`}>
                      {shortId(node.id)}
                    </Link>{" "}
                    <span className="muted small" data-testid="child-label">
                      {childLabel(from + i + 1, total)}
                    </span>
                  </td>
                  <td data-label="Agent">{node.agent}</td>
                  <td data-label="Status">
                    <StatusBadge status={node.status} />
                  </td>
                  <td data-label="Created">
                    <When iso={node.createdAt} />
                  </td>
                </tr>
              ))}
            </tbody>
          </table>
        </div>
      )}
      {(after || next.hasNextPage) && (
        <nav className="pager" aria-label="Pages of children">
          {after && <Link to={childrenHref(path, params, null)}>← First children</Link>}
          {next.hasNextPage && next.endCursor && (
            <Link to={childrenHref(path, params, next.endCursor, from + edges.length)}>Next children →</Link>
          )}
        </nav>
      )}
    </>
  );
}
