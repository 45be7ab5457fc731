// Package debuginfod downloads debug files by build ID from debuginfod
// servers (GET <url>/buildid/<id>/debuginfo) into elfutils' cache, in the
// background ([Fetcher]) or blocking ([Client.Get]), configured by
// elfutils' environment variables ([ReadConfig]).
//
// # Spec
//
// debuginfod(8) and debuginfod-client-config(7) of elfutils.
package debuginfod
