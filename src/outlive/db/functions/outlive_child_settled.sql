CREATE OR REPLACE FUNCTION outlive_child_settled() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    -- A child run settled: its parent counts it (`children_settled`), gets `child_settled` on
    -- its timeline and, when it is WAITING for its children and this settle is one it waits for
    -- (the count reaches `wake_at_children`, or the child did not succeed), goes back to QUEUED
    -- (`resumed {by: "children"}`), not admitted: the settle's caller dispatches the tenant
    -- after its commit. A settled parent, or one asked to stop, is left alone.
    WITH moved AS (
        UPDATE runs p SET children_settled = p.children_settled + 1,
               status = CASE WHEN w.woken THEN 'QUEUED' ELSE p.status END,
               waiting_for = CASE WHEN w.woken THEN NULL ELSE p.waiting_for END,
               wake_at = CASE WHEN w.woken THEN NULL ELSE p.wake_at END,
               wake_at_children = CASE WHEN w.woken THEN NULL ELSE p.wake_at_children END,
               resumes = p.resumes + CAST(w.woken AS int),
               lease_expires_at = CASE WHEN w.woken THEN NULL ELSE p.lease_expires_at END,
               dispatched_at = CASE WHEN w.woken THEN NULL ELSE p.dispatched_at END,
               event_seq = p.event_seq + 1 + CAST(w.woken AS int), updated_at = now()
          FROM (SELECT id, (status = 'WAITING' AND waiting_for = 'children'
                            AND (children_settled + 1 >= coalesce(wake_at_children, 0)
                                 OR NEW.status <> 'SUCCEEDED')) AS woken
                  FROM runs WHERE id = NEW.parent_id AND cancel_requested_at IS NULL
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
