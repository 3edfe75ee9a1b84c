CREATE OR REPLACE FUNCTION outlive_child_settled() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    -- A child run settled: its parent counts it (`children_settled`, what a parent that parks
    -- for its children compares against), gets `child_settled` on its timeline and, when it is
    -- WAITING for its children, goes back to QUEUED (`resumed {by: "children"}`), not admitted:
    -- the settle's caller dispatches the tenant after its commit. A settled parent is left alone.
    WITH moved AS (
        UPDATE runs p SET children_settled = p.children_settled + 1,
               status = CASE WHEN w.woken THEN 'QUEUED' ELSE p.status END,
               waiting_for = CASE WHEN w.woken THEN NULL ELSE p.waiting_for END,
               wake_at = CASE WHEN w.woken THEN NULL ELSE p.wake_at END,
               resumes = p.resumes + CAST(w.woken AS int),
               lease_expires_at = CASE WHEN w.woken THEN NULL ELSE p.lease_expires_at END,
               dispatched_at = CASE WHEN w.woken THEN NULL ELSE p.dispatched_at END,
               event_seq = p.event_seq + 1 + CAST(w.woken AS int), updated_at = now()
          FROM (SELECT id, (status = 'WAITING' AND waiting_for = 'children') AS woken
                  FROM runs WHERE id = NEW.parent_id
                   AND status IN ('QUEUED', 'RUNNING', 'WAITING') FOR UPDATE) w
         WHERE p.id = w.id
        RETURNING p.id, p.event_seq, w.woken)
    INSERT INTO run_events (run_id, seq, type, data)
    SELECT id, event_seq - CAST(woken AS int), 'child_settled',
           jsonb_build_object('childId', NEW.id, 'status', NEW.status)
      FROM moved
    UNION ALL
    SELECT id, event_seq, 'resumed', '{"by": "children"}'::jsonb FROM moved WHERE woken;
    RETURN NULL;
END $$;
