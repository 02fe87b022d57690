package raftfsm

import "sort"

func sortRecords(rs []*DatabaseRecord) {
	sort.Slice(rs, func(i, j int) bool { return rs[i].DatabaseName < rs[j].DatabaseName })
}

func sortNodes(ns []NodeInfo) {
	sort.Slice(ns, func(i, j int) bool { return TagLess(ns[i].Tag, ns[j].Tag) })
}
