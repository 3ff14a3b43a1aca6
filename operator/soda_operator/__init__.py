"""soda_operator: everything of kubesoda that speaks Kubernetes (CRD translation, CLI, operator)."""
