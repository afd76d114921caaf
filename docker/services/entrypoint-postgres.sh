#!/bin/sh
# Start PostgreSQL on a data folder (a volume), creating the cluster and the `mlmodelscope`
# database on first start; trust authentication on the compose network only.
set -eu
DATA=/var/lib/postgresql/data
BIN=/usr/lib/postgresql/15/bin
mkdir -p "$DATA" /run/postgresql
chown postgres:postgres "$DATA" /run/postgresql
if [ ! -s "$DATA/PG_VERSION" ]; then
  su postgres -s /bin/sh -c "$BIN/initdb -D $DATA -U postgres --auth=trust" >/dev/null
  echo "listen_addresses = '*'" >> "$DATA/postgresql.conf"
  echo "host all all 0.0.0.0/0 trust" >> "$DATA/pg_hba.conf"
  su postgres -s /bin/sh -c "$BIN/pg_ctl -D $DATA -w start" >/dev/null
  su postgres -s /bin/sh -c "psql -q -c 'CREATE DATABASE mlmodelscope'"
  su postgres -s /bin/sh -c "$BIN/pg_ctl -D $DATA -w stop" >/dev/null
fi
exec su postgres -s /bin/sh -c "exec $BIN/postgres -D $DATA"
