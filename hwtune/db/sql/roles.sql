-- hwtune result store on PostgreSQL: a writer role for tuning nodes, a read-only role for engines.
--
-- Run once per database, as the role that owns the schema and runs `hwtune db upgrade` (ALTER DEFAULT
-- PRIVILEGES applies to tables that role creates later, so future migrations stay covered):
--
--   hwtune db upgrade --db postgresql+psycopg://OWNER@HOST/hwtune
--   psql "postgresql://OWNER@HOST/hwtune" -v writer=hwtune_writer -v reader=hwtune_reader \
--        -v dbname=hwtune -f roles.sql          (or: hwtune db roles --db ... --apply)
--
-- The roles are created without passwords; set them in psql with \password hwtune_writer (psql hashes the
-- password before sending it, so it never reaches the server log in clear), or use certificate/IAM auth.
-- Nodes then write with  postgresql+psycopg://hwtune_writer@HOST/hwtune  and engines read with
-- postgresql+psycopg://hwtune_reader@HOST/hwtune  (passwords in ~/.pgpass or PGPASSWORD, not in the URL).

CREATE ROLE :"writer" LOGIN;
CREATE ROLE :"reader" LOGIN;

-- Nobody but the owner creates objects in the schema (PostgreSQL 15 already defaults to this).
REVOKE CREATE ON SCHEMA public FROM PUBLIC;

GRANT CONNECT ON DATABASE :"dbname" TO :"writer", :"reader";
GRANT USAGE ON SCHEMA public TO :"writer", :"reader";

-- Writer: add and update rows (measurements are upserted, runs and work items change state); no DELETE, no
-- TRUNCATE, no DDL: results are append-only evidence and schema changes go through `hwtune db upgrade`.
GRANT SELECT, INSERT, UPDATE ON ALL TABLES IN SCHEMA public TO :"writer";
GRANT USAGE, SELECT ON ALL SEQUENCES IN SCHEMA public TO :"writer";
ALTER DEFAULT PRIVILEGES IN SCHEMA public GRANT SELECT, INSERT, UPDATE ON TABLES TO :"writer";
ALTER DEFAULT PRIVILEGES IN SCHEMA public GRANT USAGE, SELECT ON SEQUENCES TO :"writer";

-- Reader: SELECT only, and every transaction read-only even if a grant is added by mistake later.
GRANT SELECT ON ALL TABLES IN SCHEMA public TO :"reader";
ALTER DEFAULT PRIVILEGES IN SCHEMA public GRANT SELECT ON TABLES TO :"reader";
ALTER ROLE :"reader" SET default_transaction_read_only = on;
