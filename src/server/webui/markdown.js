// A small Markdown renderer for model output: fenced code, headings, lists, quotes and
// paragraphs; inline code, bold, italic and http(s) links. It builds DOM nodes and sets only
// textContent and vetted attributes, so no text the model writes is ever parsed as HTML.

function element(tag, text) {
  const node = document.createElement(tag);
  if (text !== undefined) node.textContent = text;
  return node;
}

// Inline spans: `code`, **bold**, *italic* or _italic_, [label](https://...). Anything else,
// links to other schemes included, stays text.
const inlinePattern = /`([^`]+)`|\*\*([^*]+)\*\*|\*([^*\s][^*]*)\*|\b_([^_\s][^_]*)_\b|\[([^\]]+)\]\((https?:\/\/[^)\s]+)\)/g;

function appendInline(parent, text) {
  let last = 0;
  for (const match of text.matchAll(inlinePattern)) {
    if (match.index > last) parent.append(text.slice(last, match.index));
    const [, code, bold, italic, underscored, label, href] = match;
    if (code !== undefined) parent.append(element("code", code));
    else if (bold !== undefined) parent.append(element("strong", bold));
    else if (italic !== undefined || underscored !== undefined) parent.append(element("em", italic ?? underscored));
    else {
      const link = element("a", label);
      link.href = href;
      link.rel = "noopener noreferrer";
      link.target = "_blank";
      parent.append(link);
    }
    last = match.index + match[0].length;
  }
  if (last < text.length) parent.append(text.slice(last));
}

function appendLines(parent, lines) {
  lines.forEach((line, i) => {
    if (i > 0) parent.append(element("br"));
    appendInline(parent, line);
  });
}

const listItem = /^\s*([-*+]|\d+[.)])\s+(.*)$/;

// Renders `text` into `container` (replacing what it held). A code fence still open, as while a
// reply streams, runs to the end.
export function renderMarkdown(container, text) {
  container.replaceChildren();
  const lines = text.split("\n");
  let i = 0;
  while (i < lines.length) {
    const line = lines[i];
    const fence = line.match(/^\s*```\s*([\w+.-]*)/);
    if (fence) {
      const code = [];
      for (++i; i < lines.length && !/^\s*```\s*$/.test(lines[i]); ++i) code.push(lines[i]);
      ++i;
      const pre = element("pre");
      const block = element("code", code.join("\n"));
      if (fence[1]) block.dataset.language = fence[1];
      pre.append(block);
      container.append(pre);
      continue;
    }
    const heading = line.match(/^(#{1,6})\s+(.*)$/);
    if (heading) {
      const node = element(`h${Math.min(6, heading[1].length + 2)}`);
      appendInline(node, heading[2]);
      container.append(node);
      ++i;
      continue;
    }
    if (listItem.test(line)) {
      const ordered = /^\s*\d/.test(line);
      const list = element(ordered ? "ol" : "ul");
      for (; i < lines.length && listItem.test(lines[i]); ++i) {
        const item = element("li");
        appendInline(item, lines[i].match(listItem)[2]);
        list.append(item);
      }
      container.append(list);
      continue;
    }
    if (line.startsWith(">")) {
      const quote = [];
      for (; i < lines.length && lines[i].startsWith(">"); ++i) quote.push(lines[i].replace(/^>\s?/, ""));
      const node = element("blockquote");
      appendLines(node, quote);
      container.append(node);
      continue;
    }
    if (line.trim() === "") {
      ++i;
      continue;
    }
    const paragraph = [];
    for (; i < lines.length && lines[i].trim() !== "" && !/^\s*```|^#{1,6}\s|^>/.test(lines[i]) && !listItem.test(lines[i]); ++i)
      paragraph.push(lines[i]);
    const node = element("p");
    appendLines(node, paragraph);
    container.append(node);
  }
}
