package main

import (
	"fmt"
	"io"
	"os"
	"strings"

	"github.com/alecthomas/kingpin/v2"
	"github.com/prometheus/prometheus/util/documentcli"
)

// addDocumentationFlags adds two hidden flags that print gpuscope's
// command line as documents, generated from the flags themselves so they
// cannot drift (TestCommandLineDocs holds the committed copies to them):
// --write-documentation, Prometheus's own, the Markdown reference in
// docs/command-line/gpuscope.md; and --write-man-page, the gpuscope(1)
// page the deb and rpm install (docs/gpuscope.1).
func addDocumentationFlags(cli *kingpin.Application) {
	write := func(gen func(*kingpin.Application, *kingpin.ParseContext, io.Writer) error) kingpin.Action {
		return func(ctx *kingpin.ParseContext) error {
			if err := gen(cli, ctx, os.Stdout); err != nil {
				fmt.Fprintf(os.Stderr, "gpuscope: %v\n", err)
				os.Exit(1)
			}
			os.Exit(0)
			return nil
		}
	}
	cli.Flag("write-documentation", "Print the command-line reference in Markdown (docs/command-line/gpuscope.md).").Hidden().
		PreAction(write(writeMarkdown)).Bool()
	cli.Flag("write-man-page", "Print the gpuscope(1) man page (docs/gpuscope.1).").Hidden().
		PreAction(write(writeManPage)).Bool()
}

func writeMarkdown(cli *kingpin.Application, _ *kingpin.ParseContext, w io.Writer) error {
	return documentcli.GenerateMarkdown(cli.Model(), w)
}

// writeManPage is kingpin's --help-man page with a title line a man
// reader takes: kingpin puts the whole multi-line --version text there.
func writeManPage(cli *kingpin.Application, ctx *kingpin.ParseContext, w io.Writer) error {
	template := strings.Replace(kingpin.ManPageTemplate, `.TH {{.App.Name}} 1 {{.App.Version}} "{{.App.Author}}"`,
		`.TH {{.App.Name}} 1 "" "gpuscope" "gpuscope manual"`, 1)
	if template == kingpin.ManPageTemplate {
		return fmt.Errorf("kingpin's man page template has no title line to replace")
	}
	// NAME is "name \- what it is" in every man page: whatis, apropos and
	// mandb read it so.
	named := strings.Replace(template, ".SH \"NAME\"\n{{.App.Name}}\n", ".SH \"NAME\"\n{{.App.Name}} \\- GPU and container monitoring in one binary\n", 1)
	if named == template {
		return fmt.Errorf("kingpin's man page template has no NAME section to complete")
	}
	template = named
	cli.UsageWriter(w)
	return cli.UsageForContextWithTemplate(ctx, 2, template)
}
