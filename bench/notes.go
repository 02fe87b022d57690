package bench

import "fmt"

// noteFor says what a closed-loop workload row measured.
func noteFor(sp spec, system string, o Options) string {
	what := sp.note
	switch sp.name {
	case WorkloadYCSBE:
		what += fmt.Sprintf(", %d records", o.ScanRecords)
	case WorkloadPut:
	default:
		what += fmt.Sprintf(", %d records", o.Records)
	}
	where := "in this process"
	if o.Binary != "" {
		where = "in its own process"
	}
	switch system {
	case sysShardnode:
		return what + fmt.Sprintf("; HTTP API, %d clients, %d shards", o.Clients, o.Shards)
	case sysPebble:
		return fmt.Sprintf("raw Pebble, %d instances, storage's tuned options; Get per read, synced Set per write, iterator per scan", o.Shards)
	case sysPG:
		note := "jsonb table, one connection per client; SELECT by id per read, INSERT ... ON CONFLICT DO UPDATE per write"
		if sp.scans {
			note += ", expression index on Key"
		}
		return note
	case sysHTTP:
		return "trivial Go HTTP handler returning a fixed body of a GET's size, " + where + ", same client setup"
	case sysFastHTTP:
		return "the same trivial handler on fasthttp, the HTTP server shardnode's API runs on, " + where
	}
	return ""
}

// bulkNote says what a bulk row measured.
func bulkNote(system string, o Options) string {
	switch system {
	case sysShardnode:
		return fmt.Sprintf("%d docs through bulk_docs, %d per request, %d senders, %d shards; latency per request", o.BulkDocs, o.BatchSize, o.Senders, o.Shards)
	case sysPebble:
		return fmt.Sprintf("same records, one synced batch per instance per %d, %d senders", o.BatchSize, o.Senders)
	case sysPG:
		return fmt.Sprintf("same records by COPY, %d rows per COPY, %d senders", o.BatchSize, o.Senders)
	}
	return ""
}
