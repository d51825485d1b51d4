#!/bin/sh
# web_embed.sh FILE... — writes, on stdout, an assembler file that embeds
# each FILE's bytes in the binary (.incbin) and a table of them, read by
# engine/serve/serve_ui.c:
#
#   struct serve_ui_file { const char *name; const unsigned char *data; size_t size; };
#   extern const struct serve_ui_file serve_ui_files[];   /* ends with name NULL */
#
# Each file is named by its base name; each one's bytes are followed by a
# NUL that the size leaves out. Paths are relative to where the assembler
# runs (the repository root: make runs there). The Makefile runs this when a
# file of engine/serve/web/ changes.
set -eu
printf '\t.section .note.GNU-stack,"",@progbits\n'
printf '\t.section .rodata\n'
i=0
for f in "$@"; do
	name=$(basename "$f")
	case "$name" in
	*[!A-Za-z0-9._-]* | .*) echo "web_embed.sh: $f: a name the page cannot serve" >&2; exit 1 ;;
	esac
	printf 'serve_ui_name%d:\n\t.asciz "%s"\n' "$i" "$name"
	printf '\t.balign 16\nserve_ui_data%d:\n\t.incbin "%s"\nserve_ui_end%d:\n\t.byte 0\n' "$i" "$f" "$i"
	i=$((i + 1))
done
printf '\t.section .data.rel.ro,"aw"\n\t.balign 8\n\t.globl serve_ui_files\n'
printf '\t.type serve_ui_files, @object\nserve_ui_files:\n'
j=0
while [ "$j" -lt "$i" ]; do
	printf '\t.quad serve_ui_name%d, serve_ui_data%d, serve_ui_end%d - serve_ui_data%d\n' "$j" "$j" "$j" "$j"
	j=$((j + 1))
done
printf '\t.quad 0, 0, 0\n'
