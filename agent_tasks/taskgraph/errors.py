"""The graph store's errors, the same whichever store is behind the port (``taskgraph.port``):
each adapter maps its driver's errors to these, so nothing outside an adapter imports a driver.

::

    GraphError                    any failure of the graph store
    ├── GraphUnavailable          may pass: trying later can help (unreachable, timed out,
    │                             a transient server error, a lock or deadlock)
    ├── GraphAuthError            the store refused the credentials (a configuration error)
    └── GraphDataError            the store refused the statement or its data: trying again
        │                         with the same input fails the same way
        └── TaskIncarnationError  the mirror met a task node that is not its task's

The driver's own error stays attached as ``__cause__``.
"""

from __future__ import annotations


class GraphError(Exception):
    """A failure of the graph store (the base of this module's errors)."""


class GraphUnavailable(GraphError):
    """The graph store did not answer, or answered with an error that may pass (a transient
    error, a deadlock, a transaction out of time): trying later can help."""


class GraphAuthError(GraphError):
    """The graph store refused the credentials (``NEO4J_USERNAME``/``NEO4J_PASSWORD``, or the
    FalkorDB URL's user and password)."""


class GraphDataError(GraphError):
    """The graph store refused a statement or its data (a constraint, a value it cannot
    store, a statement it cannot run): the same input fails the same way again."""


class TaskIncarnationError(GraphDataError, ValueError):
    """The mirror met a task node that is not its task's: one created by an earlier task of
    the same workflow id whose history Temporal deleted (retention), or the tombstone of a
    deleted task. A data error (the mirror does not retry it): the name is taken."""
