CREATE OR REPLACE FUNCTION outlive_tenant_tags(p_tenant uuid, p_tags varchar[])
RETURNS text[] LANGUAGE sql IMMUTABLE PARALLEL SAFE AS $$
    -- A run's tags, each prefixed with its tenant's id: the key of `ix_runs_tenant_tags`, so a
    -- lookup of one tenant's tag reads that tenant's entries only, never every tenant's.
    SELECT coalesce(array_agg(p_tenant::text || ':' || t), '{}') FROM unnest(p_tags) AS t
$$;
