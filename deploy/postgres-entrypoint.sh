#!/bin/sh
# stint-postgres entrypoint: initdb on the first start, then exec postgres (PID 1).
#
# First start only (an empty data directory):
#   POSTGRES_USER (postgres) is the bootstrap superuser, with POSTGRES_PASSWORD;
#   POSTGRES_DB (= user) is created, owned by it;
#   POSTGRES_APP_USER with POSTGRES_APP_PASSWORD, when both are set, is created as a
#   plain login role (no superuser, no CREATEDB, no CREATEROLE) and nothing more:
#   `STINT_APP_ROLE=<it> stint migrate`, run as the owner, grants it Stint's DML.
set -eu

: "${PGDATA:=/var/lib/postgresql/data}"
user=${POSTGRES_USER:-postgres}
db=${POSTGRES_DB:-$user}
app_user=${POSTGRES_APP_USER:-}

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
    for name in "$user" "$db" ${app_user:+"$app_user"}; do
        valid_name "$name" || {
            echo "stint-postgres: '$name' is not a plain lower-case name" >&2
            exit 2
        }
    done
    if [ -n "$app_user" ]; then
        case "${POSTGRES_APP_PASSWORD:-}" in
            "")
                echo "stint-postgres: POSTGRES_APP_USER needs POSTGRES_APP_PASSWORD" >&2
                exit 2
                ;;
            *"
"*)
                echo "stint-postgres: POSTGRES_APP_PASSWORD must be one line" >&2
                exit 2
                ;;
        esac
        if [ "$app_user" = "$user" ]; then
            echo "stint-postgres: POSTGRES_APP_USER must differ from POSTGRES_USER" >&2
            exit 2
        fi
    fi
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
    if [ -n "$app_user" ]; then
        # Single-user mode reads one statement per line; the password is a SQL
        # literal (quotes doubled), stored as a SCRAM verifier. No statement is
        # logged, not even a failing one (log_min_error_statement=panic).
        quoted=$(printf '%s' "$POSTGRES_APP_PASSWORD" | sed "s/'/''/g")
        printf "CREATE ROLE %s LOGIN NOSUPERUSER NOCREATEDB NOCREATEROLE PASSWORD '%s'\n" \
            "$app_user" "$quoted" |
            postgres --single -D "$PGDATA" -c listen_addresses='' -c log_min_error_statement=panic \
                postgres >/dev/null
        echo "stint-postgres: created the login role $app_user (no privileges yet)" >&2
    fi
    echo "stint-postgres: initialised $PGDATA (user $user, database $db)" >&2
fi

exec postgres -D "$PGDATA" "$@"
