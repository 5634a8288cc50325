// The dashboard script's list of domains when a project has many: a filter (part of a hostname, or a
// status word: pending, verified, failed, misconfigured) and pages of PAGE_SIZE domains, so sixty
// domains are not one 17,000-pixel page. Part of script.ts's String.raw literal, set in where it
// stands inside that script's closure ($, show and render are defined there); plain ES2020, no
// backquotes.
export const DOMAIN_LIST = String.raw`  const PAGE_SIZE = 20;
  const list = { filter: '', page: 0 };

  function matchesFilter(domain, words) {
    if (domain.hostname.includes(words)) return true;
    return words === domain.status || (words === 'misconfigured' && domain.health === 'misconfigured');
  }

  // the domains of the page shown; the controls say which and how many
  function shownDomains(domains) {
    const words = list.filter.trim().toLowerCase();
    const matching = words ? domains.filter((d) => matchesFilter(d, words)) : domains;
    const pages = Math.max(1, Math.ceil(matching.length / PAGE_SIZE));
    list.page = Math.max(0, Math.min(list.page, pages - 1));
    const first = list.page * PAGE_SIZE;
    const shown = matching.slice(first, first + PAGE_SIZE);
    show($('domains-list-controls'), domains.length > PAGE_SIZE || words !== '');
    show($('domains-pages'), pages > 1);
    $('domains-prev').disabled = list.page === 0;
    $('domains-next').disabled = list.page === pages - 1;
    const range = shown.length === 0 ? '' : (first + 1) + '–' + (first + shown.length) + ' of ';
    $('domains-range').textContent = words
      ? (matching.length === 0 ? 'No domain matches "' + list.filter.trim() + '"' : range + matching.length + ' matching')
      : range + domains.length;
    return shown;
  }

  // a new project shows its first page, unfiltered
  function resetDomainList() {
    list.filter = '';
    list.page = 0;
    $('domains-filter').value = '';
  }

  // a domain just added is on the last page
  function showLastDomainPage() {
    resetDomainList();
    list.page = Infinity;
  }

  $('domains-filter').addEventListener('input', () => { list.filter = $('domains-filter').value; list.page = 0; render(); });
  $('domains-prev').addEventListener('click', () => { list.page -= 1; render(); $('domains-title').focus(); });
  $('domains-next').addEventListener('click', () => { list.page += 1; render(); $('domains-title').focus(); });
`;
