"""What every controller function needs and none should write again: one JSON log line
(``log``), one embedded-metric writer (``metrics``) and the retry configurations of its AWS
clients, named by purpose (``clients``). Plain Python and botocore, no AWS call: why not
Powertools for AWS Lambda is measured in docs/performance.md and decided in docs/architecture.md."""
