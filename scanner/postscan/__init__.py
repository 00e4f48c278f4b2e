"""What happens to the results of a scan once the checks ran: exemptions, the baseline diff,
compliance frameworks, run history and the Pushgateway. Each reads check runs or report
documents, never the cluster."""
