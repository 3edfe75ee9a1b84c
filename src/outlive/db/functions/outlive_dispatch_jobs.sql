CREATE OR REPLACE FUNCTION outlive_dispatch_jobs(p_tenant uuid, p_default integer)
RETURNS TABLE (kind text, id uuid) LANGUAGE plpgsql AS $$
DECLARE
    cap integer;
    held integer;
BEGIN
    SELECT coalesce(t.max_inflight_jobs, p_default) INTO cap
      FROM tenants t WHERE t.id = p_tenant FOR UPDATE;
    IF NOT FOUND THEN RETURN; END IF;
    SELECT (SELECT count(*) FROM webhook_deliveries d WHERE d.tenant_id = p_tenant
              AND d.status = 'PENDING' AND d.dispatched_at IS NOT NULL)
         + (SELECT count(*) FROM invitations i WHERE i.tenant_id = p_tenant
              AND i.status = 'PENDING' AND i.dispatched_at IS NOT NULL)
      INTO held;
    IF held >= cap THEN RETURN; END IF;
    RETURN QUERY
    WITH chosen AS (
        SELECT w.kind, w.id FROM (
            SELECT 'webhook' AS kind, d.id, d.created_at FROM webhook_deliveries d
             WHERE d.tenant_id = p_tenant AND d.status = 'PENDING' AND d.dispatched_at IS NULL
            UNION ALL
            SELECT 'invitation', i.id, i.created_at FROM invitations i
             WHERE i.tenant_id = p_tenant AND i.status = 'PENDING' AND i.dispatched_at IS NULL
        ) w ORDER BY w.created_at, w.id LIMIT cap - held),
    webhooks AS (
        UPDATE webhook_deliveries d
           SET dispatched_at = now(), relay_after = now() + interval '10 seconds'
          FROM chosen c
         WHERE c.kind = 'webhook' AND d.id = c.id AND d.status = 'PENDING'
           AND d.dispatched_at IS NULL
        RETURNING 'webhook'::text, d.id),
    emails AS (
        UPDATE invitations i
           SET dispatched_at = now(), relay_after = now() + interval '10 seconds'
          FROM chosen c
         WHERE c.kind = 'invitation' AND i.id = c.id AND i.status = 'PENDING'
           AND i.dispatched_at IS NULL
        RETURNING 'invitation'::text, i.id)
    SELECT * FROM webhooks UNION ALL SELECT * FROM emails;
END $$;
