// SPDX-License-Identifier: GPL-2.0

#include <linux/mm.h>

__rust_helper unsigned long rust_helper_page_to_pfn(const struct page *page)
{
	return page_to_pfn(page);
}

__rust_helper void rust_helper_put_page(struct page *page)
{
	put_page(page);
}

__rust_helper void rust_helper_get_page(struct page *page)
{
	get_page(page);
}
