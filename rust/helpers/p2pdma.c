// SPDX-License-Identifier: GPL-2.0

#include <linux/mm.h>
#include <linux/memremap.h>
#include <linux/page_ref.h>

__rust_helper void rust_helper_set_page_count(struct page *page, int v)
{
	set_page_count(page, v);
}

__rust_helper int rust_helper_page_ref_count(const struct page *page)
{
	return page_ref_count(page);
}

__rust_helper struct dev_pagemap *rust_helper_page_pgmap(const struct page *page)
{
	return page_pgmap(page);
}

__rust_helper struct page *rust_helper_pfn_to_page(unsigned long pfn)
{
	return pfn_to_page(pfn);
}

__rust_helper unsigned long rust_helper_page_to_pfn(const struct page *page)
{
	return page_to_pfn(page);
}

__rust_helper void rust_helper_put_page(struct page *page)
{
	put_page(page);
}
