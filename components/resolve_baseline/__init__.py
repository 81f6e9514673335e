"""The resolve_baseline component: the latest blessed model of this pipeline, found in the lineage store."""
