#!/bin/sh
# stint-postgres entrypoint: initdb on the first start, then exec postgres (PID 1).
set -eu

: "${PGDATA:=/var/lib/postgresql/data}"
user=${POSTGRES_USER:-postgres}
db=${POSTGRES_DB:-$user}

# A leading "postgres" argument is accepted, as the official image's command is.
if [ "${1:-}" = postgres ]; then
    shift
fi

valid_name() {
    case "$1" in
        "" | [0-9]* | *[!a-z0-9_]*) return 1 ;;
        *) return 0 ;;
    esac
}

if [ ! -s "$PGDATA/PG_VERSION" ]; then
    if [ -z "${POSTGRES_PASSWORD:-}" ]; then
        echo "stint-postgres: set POSTGRES_PASSWORD (the data directory is empty)" >&2
        exit 2
    fi
    for name in "$user" "$db"; do
        valid_name "$name" || {
            echo "stint-postgres: '$name' is not a plain lower-case name" >&2
            exit 2
        }
    done
    pwfile=$(mktemp)
    printf '%s\n' "$POSTGRES_PASSWORD" >"$pwfile"
    initdb --pgdata="$PGDATA" --username="$user" --pwfile="$pwfile" \
        --auth-local=trust --auth-host=scram-sha-256 --encoding=UTF8 --locale=C.UTF-8 >/dev/null
    rm -f "$pwfile"
    # Password logins from anywhere the server listens (a container network, or the
    # host's with --network host; narrow it with -c listen_addresses=...).
    echo "host all all all scram-sha-256" >>"$PGDATA/pg_hba.conf"
    echo "listen_addresses = '*'" >>"$PGDATA/postgresql.conf"
    if [ "$db" != postgres ]; then
        echo "CREATE DATABASE $db OWNER $user" |
            postgres --single -D "$PGDATA" -c listen_addresses='' postgres >/dev/null
    fi
    echo "stint-postgres: initialised $PGDATA (user $user, database $db)" >&2
fi

exec postgres -D "$PGDATA" "$@"
