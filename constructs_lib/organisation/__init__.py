"""What spans the organisation: service control and tag policies (``guardrails``), the
compliance packs an app runs (``compliance``), the delivery pipeline (``pipeline``) and the
CloudFormation and service limits a model must fit (``limits``)."""
