CREATE OR REPLACE FUNCTION outlive_dispatch_runs(p_tenant uuid, p_default integer)
RETURNS SETOF uuid LANGUAGE plpgsql AS $$
DECLARE
    cap integer;
    held integer;
BEGIN
    SELECT coalesce(t.max_running_runs, p_default) INTO cap
      FROM tenants t WHERE t.id = p_tenant FOR UPDATE;
    IF NOT FOUND THEN RETURN; END IF;
    SELECT count(*) INTO held FROM runs r
     WHERE r.tenant_id = p_tenant AND r.status IN ('QUEUED', 'RUNNING')
       AND r.dispatched_at IS NOT NULL;
    RETURN QUERY
    UPDATE runs u SET dispatched_at = now(), relay_after = now() + interval '10 seconds'
     WHERE u.id IN (SELECT w.id FROM runs w
                     WHERE w.tenant_id = p_tenant AND w.status = 'QUEUED'
                       AND w.dispatched_at IS NULL AND w.queued_behind_id IS NULL
                     ORDER BY w.created_at, w.id LIMIT greatest(cap - held, 0))
       AND u.status = 'QUEUED' AND u.dispatched_at IS NULL AND u.queued_behind_id IS NULL
    RETURNING u.id;
END $$;
