package main

import (
	"github.com/spf13/cobra"
)

func newRootCmd() *cobra.Command {
	root := &cobra.Command{
		Use:   "shardnode",
		Short: "A sharded, replicated document database that moves data between shards online",
		Long: `shardnode is a sharded, replicated document database server.

Documents live in 1,048,576 buckets; buckets map to shards; shards have
replicas on the cluster's nodes. Any node serves any database over HTTP and
routes each request by bucket.

Start a single node with data in ./shardnode-data and HTTP on 127.0.0.1:8080:

  shardnode serve

Then create a database and write a document:

  curl -X PUT localhost:8080/admin/databases/shop -d '{"Shards":3}'
  curl -X PUT 'localhost:8080/databases/shop/docs?id=users/1' -d '{"Name":"Ada"}'`,
		SilenceUsage:  true,
		SilenceErrors: true,
	}
	root.AddCommand(newServeCmd(), newVersionCmd(), newBenchCmd(), newBenchCeilingCmd(), newBucketsCmd())
	return root
}
