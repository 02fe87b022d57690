#!/usr/bin/env bash
# pg-start.sh: start a throwaway PostgreSQL server for `shardnode bench --pg`.
#
# Installs Debian's postgresql package if it is missing, initialises a
# cluster under $PGBENCH_DIR (default /tmp/shardnode-pg) owned by the
# postgres user, with trust authentication for local connections only
# (127.0.0.1 and the Unix socket in that directory), starts it on
# 127.0.0.1:$PGBENCH_PORT (default 5432), creates the database "bench" and
# prints its URL on stdout (everything else goes to stderr).
#
# Idempotent: a server already answering on the port with a "bench"
# database is left as it is; a stopped cluster in $PGBENCH_DIR is
# restarted. Stop it with:
#   runuser -u postgres -- "$(ls -d /usr/lib/postgresql/*/bin | sort -V | tail -1)/pg_ctl" -D /tmp/shardnode-pg/data stop
#
# Durability settings are PostgreSQL's defaults (fsync and
# synchronous_commit on), so its upserts are as durable as shardnode's PUTs.
set -euo pipefail

dir=${PGBENCH_DIR:-/tmp/shardnode-pg}
port=${PGBENCH_PORT:-5432}
db=bench
url="postgres://postgres@127.0.0.1:${port}/${db}?sslmode=disable"

log() { echo "pg-start: $*" >&2; }

as_postgres() {
	if [ "$(id -un)" = postgres ]; then
		"$@"
	else
		runuser -u postgres -- "$@"
	fi
}

pgbin() {
	ls -d /usr/lib/postgresql/*/bin 2>/dev/null | sort -V | tail -1
}

if [ -z "$(pgbin)" ] || [ ! -x "$(pgbin)/initdb" ]; then
	log "installing Debian's postgresql"
	if [ "$(id -u)" -ne 0 ]; then
		log "not root: install postgresql yourself (apt-get install -y postgresql)"
		exit 1
	fi
	export DEBIAN_FRONTEND=noninteractive
	apt-get update >&2
	apt-get install -y postgresql >&2
	# The package may create and start Debian's own "main" cluster on our
	# port (with password authentication); stop it so ours can listen.
	pg_lsclusters -h 2>/dev/null | while read -r ver name cport status _; do
		if [ "$cport" = "$port" ] && [ "$status" = online ]; then
			log "stopping Debian's cluster $ver/$name on port $port"
			pg_ctlcluster "$ver" "$name" stop >&2 || true
		fi
	done
fi
bin=$(pgbin)
log "using $bin"

ready() { "$bin/pg_isready" -q -h 127.0.0.1 -p "$port"; }

if ! ready; then
	if [ ! -s "$dir/data/PG_VERSION" ]; then
		log "initialising a cluster in $dir/data"
		mkdir -p "$dir"
		chown postgres:postgres "$dir" 2>/dev/null || true
		chmod 700 "$dir"
		as_postgres "$bin/initdb" -D "$dir/data" -U postgres --auth=trust --encoding=UTF8 --locale=C.UTF-8 >&2
		{
			echo "listen_addresses = '127.0.0.1'"
			echo "port = $port"
			echo "unix_socket_directories = '$dir'"
			echo "max_connections = 200"
			echo "shared_buffers = 256MB"
		} | as_postgres tee -a "$dir/data/postgresql.conf" >/dev/null
		# Trust only the loopback address and the private socket.
		printf '%s\n' \
			"local all all trust" \
			"host all all 127.0.0.1/32 trust" |
			as_postgres tee "$dir/data/pg_hba.conf" >/dev/null
	fi
	log "starting PostgreSQL on 127.0.0.1:$port"
	as_postgres "$bin/pg_ctl" -D "$dir/data" -l "$dir/server.log" -w -t 60 start >&2
fi

for _ in $(seq 1 60); do
	ready && break
	sleep 0.5
done
if ! ready; then
	log "PostgreSQL is not accepting connections on 127.0.0.1:$port (see $dir/server.log)"
	exit 1
fi

psql_q() { "$bin/psql" -h 127.0.0.1 -p "$port" -U postgres -v ON_ERROR_STOP=1 -qAtX "$@"; }
if ! psql_q -d postgres -w -c "select 1" >/dev/null 2>&1; then
	log "a server answers on 127.0.0.1:$port but refuses a password-less login as postgres;"
	log "it is not the one this script starts: stop it, or set PGBENCH_PORT to another port"
	exit 1
fi
if [ "$(psql_q -d postgres -c "select 1 from pg_database where datname = '$db'")" != 1 ]; then
	log "creating database $db"
	psql_q -d postgres -c "create database $db"
fi
psql_q -d "$db" -c "select 1" >/dev/null
echo "$url"
