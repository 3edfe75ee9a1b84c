CREATE OR REPLACE FUNCTION outlive_dispatch_runs(p_tenant uuid, p_default integer)
RETURNS SETOF uuid LANGUAGE plpgsql AS $$
DECLARE
    cap integer;
    held integer;
BEGIN
    SELECT coalesce(t.max_running_runs, p_default) INTO cap
      FROM tenants t WHERE t.id = p_tenant FOR NO KEY UPDATE;
    IF NOT FOUND THEN RETURN; END IF;
    -- A tenant-wide budget that holds one of the tenant's runs would hold every run that
    -- records usage at its first step: admitting `cap` at once only spins workers claiming and
    -- parking them (issue 42). One at a time until it has room again (its runs wake).
    IF cap > 1 AND EXISTS (SELECT 1 FROM budgets b
                            WHERE b.tenant_id = p_tenant AND b.scope = 'TENANT'
                              AND EXISTS (SELECT 1 FROM runs h WHERE h.held_by_budget_id = b.id
                                             AND h.status = 'WAITING')) THEN
        cap := 1;
    END IF;
    SELECT count(*) INTO held FROM runs r
     WHERE r.tenant_id = p_tenant AND r.status IN ('QUEUED', 'RUNNING')
       AND r.dispatched_at IS NOT NULL;
    IF held >= cap THEN RETURN; END IF;
    -- The pick runs once (an InitPlan) and the update finds it by primary key and tenant: no
    -- estimate, however stale, plans a scan of other tenants' waiting runs (migration 0026).
    -- Priority first (1 first), then commit order; a debounced run waits for its notBefore,
    -- checked again on the row the update locks (a later start may have moved it on).
    RETURN QUERY
    UPDATE runs u SET dispatched_at = now(), relay_after = now() + interval '10 seconds'
     WHERE u.id = ANY (ARRAY(SELECT w.id FROM runs w
                              WHERE w.tenant_id = p_tenant AND w.status = 'QUEUED'
                                AND w.dispatched_at IS NULL AND w.queued_behind_id IS NULL
                                AND (w.not_before IS NULL OR w.not_before <= now())
                              ORDER BY w.priority, w.created_at, w.id LIMIT cap - held))
       AND u.tenant_id = p_tenant
       AND u.status = 'QUEUED' AND u.dispatched_at IS NULL AND u.queued_behind_id IS NULL
       AND (u.not_before IS NULL OR u.not_before <= now())
    RETURNING u.id;
END $$;
