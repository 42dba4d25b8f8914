-- Staging built for speed (issue 5). The part fence records what each part staged, so
-- process no longer scans the staged rows to count them; stage tables lose their primary
-- key (the part fence and the sink's key already exclude duplicates), become UNLOGGED (they
-- are transient; commit's count check catches rows lost to a crash) and carry a row hash.
alter table onceflow.stage_parts
    add column valid bigint,
    add column dead bigint,
    add column bytes bigint,       -- bytes read (keys + values) for the part
    add column checksum numeric;   -- exact sum of the part's row_hash values

do $$
declare
    t record;
begin
    for t in
        select c.oid::regclass as tbl, n.nspname as schema
        from pg_class c join pg_namespace n on n.oid = c.relnamespace
        where c.relname = 'stage_orders' and c.relkind = 'r'
    loop
        execute format('alter table %s drop constraint if exists stage_orders_pkey', t.tbl);
        execute format('alter table %s add column if not exists row_hash bigint', t.tbl);
        execute format('alter table %s set unlogged', t.tbl);
    end loop;
end $$;
