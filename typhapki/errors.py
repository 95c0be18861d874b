"""Errors a user can cause, each with its documented exit code (docs/exit-codes.md).

The CLI turns every one of these into a single line on stderr and its exit code;
nothing below the CLI prints or exits.
"""

from __future__ import annotations

# The exit-code contract, shared by every command.
EXIT_OK = 0
EXIT_NEEDS_ACTION = 1  # check found problems, DNS gate failed, lint failed
EXIT_USAGE = 2  # bad option, bad configuration or input file
EXIT_REFUSED = 3  # refused for safety: would overwrite a CA, CA about to expire, stage order
EXIT_IO = 4  # the filesystem said no: unwritable directory, lock held too long
EXIT_SIGNER = 5  # the signer (cfssl) is down, slow, broken or refused the request
EXIT_DEFERRED = 6  # restart-typha: the PodDisruptionBudget refused the eviction; retry later
EXIT_KUBE_API = 7  # restart-typha: the Kubernetes API unreachable, untrusted, refused or broken


class TyphapkiError(Exception):
    """Base class: a problem the user can fix, reported as one line."""

    exit_code = EXIT_USAGE


class UsageError(TyphapkiError):
    """An option value or combination that cannot work."""

    exit_code = EXIT_USAGE


class ConfigError(TyphapkiError):
    """A configuration or input file (hiera, CA, certificate) is wrong."""

    exit_code = EXIT_USAGE


class RefusedError(TyphapkiError):
    """The command would be unsafe and refuses to act."""

    exit_code = EXIT_REFUSED


class StoreError(TyphapkiError):
    """The filesystem refused an operation on a managed directory."""

    exit_code = EXIT_IO


class NeedsActionError(TyphapkiError):
    """The state on disk or in DNS is not what it must be (exit 1)."""

    exit_code = EXIT_NEEDS_ACTION


class SignerError(TyphapkiError):
    """The remote signer could not be used: down, slow, broken answer, refused (exit 5).

    Nothing is published when this is raised: the live set stays as it was.
    """

    exit_code = EXIT_SIGNER


class RestartDeferredError(TyphapkiError):
    """A Typha restart may not happen now: the PodDisruptionBudget refused the eviction,
    or this node's Typha pod is still terminating (exit 6). The restart marker stays, so
    the next run tries again."""

    exit_code = EXIT_DEFERRED


class KubeApiError(TyphapkiError):
    """The Kubernetes API could not be used: unreachable, slow, a TLS certificate not
    from the kubeconfig's CA, credentials refused, or an answer that is not what the API
    gives (exit 7). The restart marker stays."""

    exit_code = EXIT_KUBE_API
