"""The traces' endpoints: the OTLP/HTTP receiver (`receiver`, at `/v1/traces`) and the reads
under /api/v1/ (`export`, `evaluation_trace`, `timeline`, `layers`; their shared parts in
`common`)."""
