"""A database reached with password (SCRAM) authentication, with Stint's two roles.

The owner role owns the schema (created once by the superuser, as a DBA would)
and runs ``stint migrate``; the app role is what workers and APIs log in as and
gets only what the migration runner grants it. Neither may CREATE in the database.
"""

from __future__ import annotations

import secrets
from dataclasses import dataclass
from urllib.parse import quote

import psycopg
from psycopg import sql

from stint.postgres.throwaway import ThrowawayCluster

# Characters a URL must percent-encode, so that every test also covers encoding.
_HARD = "p@ss w%rd:/?#"


@dataclass(frozen=True)
class Login:
    role: str
    password: str
    url: str


@dataclass(frozen=True)
class PasswordDatabase:
    """A fresh database on a SCRAM cluster with an owner and an app login."""

    cluster: ThrowawayCluster
    database: str
    schema: str
    owner: Login
    app: Login

    def superuser(self) -> psycopg.Connection[tuple[object, ...]]:
        return psycopg.connect(self.cluster.conninfo(self.database), autocommit=True)


def _url(cluster: ThrowawayCluster, role: str, password: str, database: str) -> str:
    encoded = quote(password, safe="")
    return f"postgresql://{role}:{encoded}@{cluster.host}:{cluster.port}/{database}"


def _login(cluster: ThrowawayCluster, role: str, database: str) -> Login:
    password = f"{_HARD}{secrets.token_hex(8)}"
    return Login(role, password, _url(cluster, role, password, database))


def create_password_database(
    cluster: ThrowawayCluster, *, schema: str = "stint"
) -> PasswordDatabase:
    """Roles with passwords, a database they may not CREATE in, the schema owned by the owner."""
    tag = secrets.token_hex(4)
    database = f"app_{tag}"
    owner = _login(cluster, f"stint_owner_{tag}", database)
    app = _login(cluster, f"stint_app_{tag}", database)
    with psycopg.connect(cluster.conninfo("postgres"), autocommit=True) as conn:
        for login in (owner, app):
            conn.execute(
                sql.SQL("CREATE ROLE {} LOGIN PASSWORD {}").format(
                    sql.Identifier(login.role), sql.Literal(login.password)
                )
            )
        conn.execute(sql.SQL("CREATE DATABASE {}").format(sql.Identifier(database)))
    with psycopg.connect(cluster.conninfo(database), autocommit=True) as conn:
        conn.execute(
            sql.SQL("CREATE SCHEMA {} AUTHORIZATION {}").format(
                sql.Identifier(schema), sql.Identifier(owner.role)
            )
        )
    return PasswordDatabase(cluster, database, schema, owner, app)
