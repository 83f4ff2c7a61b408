"""Statistics: equivalence of output distributions, disparity across groups, sampler audits."""

from specaudit.stats.sampler_audit import SamplerAuditResult, audit_sampler

__all__ = ["SamplerAuditResult", "audit_sampler"]
