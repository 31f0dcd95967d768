"""Moved to :mod:`cardgen.schemas.summary`, so that reading a summary does not import the analysis (numpy,
pandas); re-exported here for the modules that still import it from here."""

from cardgen.schemas.summary import (  # noqa: F401  (re-exported)
    SUMMARY_SCHEMA_VERSION,
    CapacityThreshold,
    CrossCheckWindow,
    Distribution,
    GenerationHeadline,
    GpuReading,
    GpuTelemetry,
    Headline,
    HeadlinePrecision,
    IngestionFit,
    KVCapacity,
    KVEstimate,
    LatencyCheck,
    PointPrecision,
    ScenarioSummary,
    ServerVsClient,
    Summary,
    TokenCheck,
    WaveResult,
)
