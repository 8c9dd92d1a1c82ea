-- One database per service (SPEC §1), created once on an empty data
-- directory by the postgres image's entrypoint, as POSTGRES_USER (who then
-- owns them). Each service runs its own migrations at start-up.
-- k8s/overlays/demo/postgres/init-databases.sql is a copy (kustomize cannot
-- read files outside its folder); a test keeps the two identical.
CREATE DATABASE product;
CREATE DATABASE "order";
CREATE DATABASE inventory;
