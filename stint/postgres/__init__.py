"""PostgreSQL processes Stint runs itself: binary discovery, the embedded cluster,
throwaway test clusters and scratch databases. Data access is ``stint.store``."""
