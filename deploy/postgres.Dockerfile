# PostgreSQL for Stint's tests and the compose file, from Debian's postgresql
# package on the same base as the worker image (no registry image needed).
#
#   docker build -f deploy/postgres.Dockerfile --network host \
#       --build-arg BASE_IMAGE=stint-base:bookworm -t stint-postgres:15 deploy
#
# PG_MAJOR is the Debian package's major version: 15 on bookworm (stint-base, and
# python:3.11-slim-bookworm); a trixie base has 17.
#
# Configuration (read at the first start, when the data directory is empty):
#   POSTGRES_PASSWORD (required), POSTGRES_USER (postgres), POSTGRES_DB (= user);
#   POSTGRES_APP_USER and POSTGRES_APP_PASSWORD (optional): a plain login role for
#   Stint's workers and API, granted its privileges by `STINT_APP_ROLE=... stint migrate`;
#   PGPORT (5432) is the port, honoured by the server and by the healthcheck.
# Arguments are passed to `postgres`, e.g. `-c max_connections=200`.
ARG BASE_IMAGE=python:3.11-slim
FROM ${BASE_IMAGE}
ARG PG_MAJOR=15
ARG PG_UID=999
# Versions come from the base's Debian suite; an exact .deb version pin would break
# the build at every Debian point release. The postgres user is made first, with a
# fixed numeric id (the package keeps it).
# hadolint ignore=DL3008
RUN groupadd --system --gid "${PG_UID}" postgres \
    && useradd --system --uid "${PG_UID}" --gid postgres --home-dir /var/lib/postgresql \
        --shell /bin/sh postgres \
    && mkdir -p /etc/postgresql-common \
    && echo 'create_main_cluster = false' > /etc/postgresql-common/createcluster.conf \
    && apt-get update \
    && apt-get install -y --no-install-recommends "postgresql-${PG_MAJOR}" \
    && apt-get clean \
    && rm -rf /var/lib/apt/lists/* \
    && mkdir -p /var/lib/postgresql/data /var/run/postgresql \
    && chown -R postgres:postgres /var/lib/postgresql /var/run/postgresql \
    && chmod 0700 /var/lib/postgresql/data
COPY postgres-entrypoint.sh /usr/local/bin/stint-postgres-entrypoint
ENV PATH=/usr/lib/postgresql/${PG_MAJOR}/bin:$PATH \
    PGDATA=/var/lib/postgresql/data \
    PGPORT=5432 \
    PG_MAJOR=${PG_MAJOR}
LABEL org.stint.postgres-major=${PG_MAJOR}
USER ${PG_UID}:${PG_UID}
EXPOSE 5432
# PostgreSQL's "smart" shutdown would wait for every client; SIGINT is "fast".
STOPSIGNAL SIGINT
# As the bootstrap role: without --username pg_isready asks as the OS user
# (postgres), a role that does not exist here, and the server logged
# `FATAL: role "postgres" does not exist` at every probe.
HEALTHCHECK --interval=5s --timeout=3s --start-period=30s --retries=5 \
    CMD ["sh", "-c", "pg_isready --quiet --host=/var/run/postgresql --username=\"$POSTGRES_USER\" --dbname=\"${POSTGRES_DB:-$POSTGRES_USER}\""]
ENTRYPOINT ["/usr/local/bin/stint-postgres-entrypoint"]
CMD []
