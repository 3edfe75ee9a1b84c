import { useMutation, useQuery } from "@apollo/client/react";
import { type FormEvent, useEffect, useRef, useState } from "react";
import { type Budget, BUDGETS, DELETE_BUDGET, SET_BUDGET } from "../api/documents/budgets";
import { describeError, isUnavailable } from "../api/errors";
import { Link, navigate, useLocation } from "../app/router";
import { ErrorNote, Loading, When } from "../ui/common";
import { FormOutcome, useFieldProblems } from "../ui/fields";
import {
  barOf,
  BREACHES,
  type BudgetForm,
  budgetTitle,
  EMPTY_FORM,
  type FormField,
  formOf,
  PERIODS,
  periodsFor,
  readBudgetForm,
  SCOPES,
} from "./budgets";

const tokens = (n: number) => new Intl.NumberFormat().format(n);
const usd = (n: number) => `$${n.toLocaleString(undefined, { minimumFractionDigits: 2, maximumFractionDigits: 4 })}`;

/**
 * The tenant's budgets: each with what its period spent and reserved, a bar against each limit
 * with its warnAt mark, the runs it holds, Edit and Delete; a form to add one (or edit, with
 * `?edit=<id>`: what "raise the limit" in the inbox opens). Follows budget.updated nudges.
 */
export function Budgets() {
  const { data, error, loading } = useQuery(BUDGETS);
  const { params } = useLocation();
  const editing = params.get("edit");
  useEffect(() => {
    document.title = "Budgets · Outlive";
  }, []);
  if (error && isUnavailable(error)) {
    return (
      <section aria-labelledby="budgets-heading">
        <h1 id="budgets-heading">Budgets</h1>
        <ErrorNote error={error} what="budgets" />
      </section>
    );
  }
  const budgets = data?.budgets ?? [];
  const edited = editing ? (budgets.find((b) => b.id === editing) ?? null) : null;
  return (
    <section aria-labelledby="budgets-heading">
      <h1 id="budgets-heading">Budgets</h1>
      <p className="muted">
        A step that would pass a budget does not start: with <em>hold</em> its run waits (it holds no worker) and goes on
        by itself once there is room again: a raised limit, a new period, or the budget deleted. Spent counts what the
        steps recorded this period; reserved is held by steps in flight.
      </p>
      {error && <ErrorNote error={error} />}
      {!data && loading && <Loading />}
      {data && budgets.length === 0 && <p className="empty">No budgets: runs spend without a limit.</p>}
      <div className="budgets">
        {budgets.map((b) => (
          <BudgetCard key={b.id} budget={b} />
        ))}
      </div>
      {data && (
        <BudgetEditor
          key={edited?.id ?? "new"}
          budget={edited}
          onDone={() => navigate("/budgets", { replace: true, keepScroll: true })}
        />
      )}
    </section>
  );
}

/** A limit's bar: spent, then reserved (striped), the warnAt mark; the figures are in words beside it. */
function LimitBar({ label, spent, reserved, limit, warnAt }: { label: string; spent: number; reserved: number; limit: number; warnAt: number }) {
  const bar = barOf(spent, reserved, limit, warnAt);
  return (
    <div className={`budget-bar${bar.full ? " budget-full" : bar.warned ? " budget-warned" : ""}`} aria-hidden="true" data-testid={`bar-${label}`}>
      <span className="budget-spent" style={{ width: `${bar.spent * 100}%` }} />
      <span className="budget-reserved" style={{ width: `${bar.reserved * 100}%` }} />
      <span className="budget-warn" style={{ left: `${warnAt * 100}%` }} title={`Warns at ${Math.round(warnAt * 100)}%`} />
    </div>
  );
}

function BudgetCard({ budget: b }: { budget: Budget }) {
  const [remove, removing] = useMutation(DELETE_BUDGET, { refetchQueries: ["Budgets"] });
  const [confirming, setConfirming] = useState(false);
  const title = budgetTitle(b);
  const breach = b.onBreach === "PAUSE" ? "holds the run" : b.onBreach === "CANCEL" ? "cancels the run" : "only warns";
  return (
    <article className="card budget" aria-label={`Budget ${title}`} data-budget-id={b.id}>
      <div className="section-head">
        <h2 className="small-heading">{title}</h2>
        <div className="toolbar">
          <Link to={`/budgets?edit=${encodeURIComponent(b.id)}`} className="button" aria-label={`Edit budget ${title}`}>
            Edit
          </Link>
          {confirming ? (
            <span role="group" aria-label={`Delete budget ${title}?`} className="confirm">
              <span className="small">Delete it? Runs it holds go on.</span>
              <button
                type="button"
                className="danger"
                autoFocus
                aria-disabled={removing.loading ? true : undefined}
                onClick={() => {
                  if (!removing.loading) void remove({ variables: { id: b.id } }).catch(() => undefined);
                }}
              >
                Yes, delete
              </button>
              <button type="button" className="quiet" onClick={() => setConfirming(false)}>
                Keep it
              </button>
            </span>
          ) : (
            <button type="button" className="danger" onClick={() => setConfirming(true)} aria-label={`Delete budget ${title}`}>
              Delete…
            </button>
          )}
        </div>
      </div>
      {removing.error && (
        <p className="note note-error" role="alert">
          {describeError(removing.error)}
        </p>
      )}
      <dl className="stats budget-stats">
        {b.limitTokens !== null && (
          <div className="budget-limit">
            <dt>Tokens</dt>
            <dd data-testid="budget-tokens">
              {tokens(b.spentTokens)} <span className="muted small">of {tokens(b.limitTokens)}</span>
            </dd>
            <LimitBar label="tokens" spent={b.spentTokens} reserved={b.reservedTokens} limit={b.limitTokens} warnAt={b.warnAt} />
          </div>
        )}
        {b.limitUsd !== null && (
          <div className="budget-limit">
            <dt>Cost</dt>
            <dd data-testid="budget-usd">
              {usd(b.spentUsd)} <span className="muted small">of {usd(b.limitUsd)}</span>
            </dd>
            <LimitBar label="usd" spent={b.spentUsd} reserved={0} limit={b.limitUsd} warnAt={b.warnAt} />
          </div>
        )}
        <div>
          <dt>Reserved</dt>
          <dd data-testid="budget-reserved">{tokens(b.reservedTokens)}</dd>
        </div>
        <div>
          <dt>Held runs</dt>
          <dd data-testid="budget-held">
            {b.heldRuns > 0 ? <Link to="/awaiting">{b.heldRuns}</Link> : 0}
          </dd>
        </div>
      </dl>
      <p className="small muted">
        Warns at {Math.round(b.warnAt * 100)}%; past its limit it {breach}.
        {b.periodStart && (
          <>
            {" "}
            This period began <When iso={b.periodStart} />.
          </>
        )}
        {b.scope === "RUN" && " Spent: summed over the runs it holds now."}
      </p>
      {b.unpricedModels.length > 0 && (
        <p className="note small" role="note">
          No price for {b.unpricedModels.join(", ")}: counted as $0. Set prices with <code>OUTLIVE_MODEL_PRICES</code>.
        </p>
      )}
    </article>
  );
}

const FIELD_IDS: Record<FormField, string> = {
  target: "budget-target",
  limitTokens: "budget-tokens",
  limitUsd: "budget-usd",
  warnAtPercent: "budget-warn",
};

/** Add a budget, or edit one (its scope, target and period stay: setBudget keys on them). */
function BudgetEditor({ budget, onDone }: { budget: Budget | null; onDone: () => void }) {
  const [form, setForm] = useState<BudgetForm>(budget ? formOf(budget) : EMPTY_FORM);
  const { show, clear, described, fieldError } = useFieldProblems<FormField>(FIELD_IDS);
  const [saved, setSaved] = useState<string | null>(null);
  const [save, saving] = useMutation(SET_BUDGET, { refetchQueries: ["Budgets"] });
  const heading = useRef<HTMLHeadingElement>(null);
  useEffect(() => {
    if (budget) {
      heading.current?.scrollIntoView({ block: "start" });
      document.getElementById("budget-tokens")?.focus();
    }
  }, [budget]);
  const set = <K extends keyof BudgetForm>(key: K, value: BudgetForm[K]) => setForm((f) => ({ ...f, [key]: value }));
  const submit = async (event: FormEvent) => {
    event.preventDefault();
    const read = readBudgetForm(form);
    if (!read.ok) {
      show(read.field, read.error);
      return;
    }
    clear();
    setSaved(null);
    try {
      await save({ variables: { input: read.input } });
      setSaved(budget ? `Saved: ${budgetTitle(read.input)}.` : `Added: ${budgetTitle(read.input)}.`);
      if (budget) onDone();
      else setForm(EMPTY_FORM);
    } catch {
      // shown below
    }
  };
  const periods = periodsFor(form.scope);
  const title = budget ? `Edit: ${budgetTitle(budget)}` : "Add a budget";
  return (
    <form className="card budget-form" onSubmit={submit} aria-labelledby="budget-form-heading" noValidate>
      <h2 id="budget-form-heading" ref={heading}>
        {title}
      </h2>
      <div className="budget-fields">
        <div className="field">
          <label htmlFor="budget-scope">Applies to</label>
          <select
            id="budget-scope"
            value={form.scope}
            disabled={budget !== null}
            onChange={(e) => {
              const scope = e.target.value as BudgetForm["scope"];
              setForm((f) => ({ ...f, scope, period: periodsFor(scope).includes(f.period) ? f.period : periodsFor(scope)[0]! }));
            }}
          >
            {SCOPES.map((s) => (
              <option key={s.value} value={s.value}>
                {s.label}
              </option>
            ))}
          </select>
        </div>
        {(form.scope === "AGENT" || form.scope === "TAG") && (
          <div className="field">
            <label htmlFor="budget-target">{form.scope === "AGENT" ? "Agent" : "Tag"}</label>
            <input
              id="budget-target"
              value={form.target}
              disabled={budget !== null}
              placeholder={form.scope === "AGENT" ? "demo" : "user:123"}
              onChange={(e) => set("target", e.target.value)}
              {...described("target")}
            />
            {fieldError("target")}
          </div>
        )}
        <div className="field">
          <label htmlFor="budget-period">Period</label>
          <select id="budget-period" value={form.period} disabled={budget !== null} onChange={(e) => set("period", e.target.value as BudgetForm["period"])}>
            {PERIODS.filter((p) => periods.includes(p.value)).map((p) => (
              <option key={p.value} value={p.value}>
                {p.label}
              </option>
            ))}
          </select>
        </div>
        <div className="field">
          <label htmlFor="budget-tokens">Token limit</label>
          <input id="budget-tokens" inputMode="numeric" value={form.limitTokens} placeholder="none" onChange={(e) => set("limitTokens", e.target.value)} {...described("limitTokens")} />
          {fieldError("limitTokens")}
        </div>
        <div className="field">
          <label htmlFor="budget-usd">USD limit</label>
          <input id="budget-usd" inputMode="decimal" value={form.limitUsd} placeholder="none" onChange={(e) => set("limitUsd", e.target.value)} {...described("limitUsd")} />
          {fieldError("limitUsd")}
        </div>
        <div className="field">
          <label htmlFor="budget-warn">Warn at (%)</label>
          <input id="budget-warn" inputMode="numeric" value={form.warnAtPercent} onChange={(e) => set("warnAtPercent", e.target.value)} {...described("warnAtPercent")} />
          {fieldError("warnAtPercent")}
        </div>
        <div className="field">
          <label htmlFor="budget-breach">Past the limit</label>
          <select id="budget-breach" value={form.onBreach} onChange={(e) => set("onBreach", e.target.value as BudgetForm["onBreach"])}>
            {BREACHES.map((b) => (
              <option key={b.value} value={b.value}>
                {b.label}
              </option>
            ))}
          </select>
        </div>
      </div>
      <div className="actions">
        <button type="submit" className="primary" aria-disabled={saving.loading ? true : undefined}>
          {budget ? "Save budget" : "Add budget"}
        </button>
        {budget && (
          <button type="button" className="quiet" onClick={onDone}>
            Cancel edit
          </button>
        )}
      </div>
      <FormOutcome error={saving.error} saved={saved} />
    </form>
  );
}
