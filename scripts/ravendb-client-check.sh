#!/usr/bin/env bash
# ravendb-client-check.sh: point RavenDB's official Node.js client (npm
# package ravendb) at a running shardnode node and use it as an application
# would: store and load documents, update them under optimistic
# concurrency, store documents without ids (the client's HiLo ids), query
# and delete. Not part of CI: it needs Node.js and the npm registry.
#
#   scripts/ravendb-client-check.sh [URL] [DB]
#
# URL defaults to http://127.0.0.1:8080; DB (default ravendbcheck<random>)
# is created with 3 shards and replication factor $RF (default 1), and
# deleted at the end. The client is installed
# into a temporary directory, at the version RAVENDB_CLIENT_VERSION names
# (default 7.2.2, the one checked).
set -euo pipefail

url=${1:-http://127.0.0.1:8080}
db=${2:-ravendbcheck$RANDOM}
version=${RAVENDB_CLIENT_VERSION:-7.2.2}
here=$(cd "$(dirname "$0")" && pwd)
work=$(mktemp -d)
trap 'curl -s -o /dev/null -X DELETE "$url/admin/databases/$db"; rm -rf "$work"' EXIT

(cd "$work" && npm init -y >/dev/null && npm install --silent --no-audit --no-fund "ravendb@$version" >/dev/null)
cp "$here/ravendb-client/check.mjs" "$work/"
curl -sf -X PUT "$url/admin/databases/$db" -d "{\"Shards\": 3, \"ReplicationFactor\": ${RF:-1}}" >/dev/null
(cd "$work" && node check.mjs "$url" "$db")
