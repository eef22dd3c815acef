"""The warmstart API: pydantic models that are the one source of truth for the CRDs under crds/."""

GROUP = "inference.sagemaker.aws.amazon.com"
VERSION = "v1"
API_VERSION = f"{GROUP}/{VERSION}"
